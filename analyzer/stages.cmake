# stallscope_analyzer_stage(NAME SOURCES... [USES stage...] [LIBS lib...] [TESTS test.cc...])
#
# The library stallscope_NAME from the sources of the folder NAME, linked to
# the stages it USES (and what they use). Before it compiles, the build
# checks that every source of the stage and every header of its folder
# includes only analyzer/ headers of its own folder and of the stages it
# uses (check_stages.cmake). TESTS go into analyzer_tests.
set(STALLSCOPE_ANALYZER_STAGES "" CACHE INTERNAL "")
function(stallscope_analyzer_stage name)
  cmake_parse_arguments(PARSE_ARGV 1 S "" "" "SOURCES;USES;LIBS;TESTS")
  add_library(stallscope_${name} STATIC ${S_SOURCES})
  target_include_directories(stallscope_${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_link_libraries(stallscope_${name} PUBLIC stallscope_format ${S_LIBS})
  # The stages it may include: its own and those it uses, transitively.
  set(allowed ${name})
  foreach(used IN LISTS S_USES)
    target_link_libraries(stallscope_${name} PUBLIC stallscope_${used})
    get_property(more GLOBAL PROPERTY stallscope_stage_allowed_${used})
    list(APPEND allowed ${more})
  endforeach()
  list(REMOVE_DUPLICATES allowed)
  set_property(GLOBAL PROPERTY stallscope_stage_allowed_${name} ${allowed})

  file(GLOB headers CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/*.h)
  set(checked ${headers})
  foreach(src IN LISTS S_SOURCES)
    list(APPEND checked ${CMAKE_CURRENT_SOURCE_DIR}/${src})
  endforeach()
  string(JOIN "|" allowed_arg ${allowed})
  string(JOIN "|" files_arg ${checked})
  set(stamp ${CMAKE_CURRENT_BINARY_DIR}/stage_${name}.checked)
  add_custom_command(
    OUTPUT ${stamp}
    COMMAND ${CMAKE_COMMAND} -DSTAGE=${name} "-DALLOWED=${allowed_arg}" "-DFILES=${files_arg}"
            -DSTAMP=${stamp} -P ${PROJECT_SOURCE_DIR}/analyzer/check_stages.cmake
    DEPENDS ${checked} ${PROJECT_SOURCE_DIR}/analyzer/check_stages.cmake
    COMMENT "Checking the includes of analyzer stage ${name}"
    VERBATIM)
  add_custom_target(stallscope_${name}_stage_check DEPENDS ${stamp})
  add_dependencies(stallscope_${name} stallscope_${name}_stage_check)

  if(STALLSCOPE_ANALYZER_UNIT_TESTS AND S_TESTS)
    target_sources(analyzer_tests PRIVATE ${S_TESTS})
  endif()
  set(STALLSCOPE_ANALYZER_STAGES ${STALLSCOPE_ANALYZER_STAGES} ${name} CACHE INTERNAL "")
endfunction()
